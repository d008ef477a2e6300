"""Recurrent models a user writes, to measure on one GPU (cuDNN's fused kernels) against the importer's pricing.

    python -m ddpsim measure --out $OUT/rnn --plan quick \
        --model validation.campaigns.rnn_models:lstm_lm@batch=20 \
        --model validation.campaigns.rnn_models:lstm_lm@batch=64@precision=bf16@optimizer=adamw \
        --model validation.campaigns.rnn_models:gru_tagger@batch=32

Each factory returns (model, make_batch) as ``ddpsim measure`` takes them: x is the token ids, y the next token.
"""
import torch
import torch.nn as nn


class LSTMLanguageModel(nn.Module):
    """Zaremba et al.'s medium PTB model: two LSTM layers of 650, a vocabulary of 10,000, 35 steps."""

    def __init__(self, vocab=10000, d=650, layers=2):
        super().__init__()
        self.embed = nn.Embedding(vocab, d)
        self.rnn = nn.LSTM(d, d, layers, batch_first=True)
        self.head = nn.Linear(d, vocab)

    def forward(self, tokens):
        return self.head(self.rnn(self.embed(tokens))[0])


class GRUTagger(nn.Module):
    """A bidirectional two-layer GRU over 128 steps, 50 tags per token."""

    def __init__(self, vocab=20000, d=256, hidden=512, tags=50):
        super().__init__()
        self.embed = nn.Embedding(vocab, d)
        self.rnn = nn.GRU(d, hidden, 2, batch_first=True, bidirectional=True)
        self.head = nn.Linear(2 * hidden, tags)

    def forward(self, tokens):
        return self.head(self.rnn(self.embed(tokens))[0])


def _tokens(vocab, steps, classes):
    def make_batch(batch_size, device, seed):
        g = torch.Generator(device="cpu").manual_seed(seed)
        x = torch.randint(0, vocab, (batch_size, steps), generator=g)
        y = torch.randint(0, classes, (batch_size, steps), generator=g)
        return x.to(device), y.to(device)

    return make_batch


def lstm_lm():
    return LSTMLanguageModel(), _tokens(10000, 35, 10000)


def gru_tagger():
    return GRUTagger(), _tokens(20000, 128, 50)

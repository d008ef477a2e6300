"""Fixtures shared by the harness tests: a free local port and a one-rank gloo process group."""

import os
import socket

import pytest


@pytest.fixture
def free_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


@pytest.fixture
def gloo_world1(free_port):
    dist = pytest.importorskip("torch.distributed")
    if not dist.is_available():
        pytest.skip("torch.distributed not available")
    os.environ.update({"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(free_port)})
    dist.init_process_group("gloo", rank=0, world_size=1)
    yield
    dist.destroy_process_group()

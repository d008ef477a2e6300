"""One-off GPU experiments whose measurements under ``validation/data`` set a model constant (not in the wheel;
torch and the standard library only, with the harness's models from ``ddpsim.measure``)."""

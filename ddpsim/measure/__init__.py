"""``ddpsim measure``: the GPU harness as a product. torch and the standard library only (no numpy, no
yaml, nothing else of ddpsim), so it runs on a GPU host where ddpsim's simulator dependencies are absent:
``python -m ddpsim.measure --out DIR`` or ``ddpsim measure --out DIR``.
"""

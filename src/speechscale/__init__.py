"""speechscale: train end-to-end speech recognition models, from one CPU to many GPUs."""
__version__ = "0.1.0"

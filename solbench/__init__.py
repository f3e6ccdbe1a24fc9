"""solbench: how close is a kernel to the hardware's speed of light, and is it faster than PyTorch?"""

__version__ = "0.1.0"

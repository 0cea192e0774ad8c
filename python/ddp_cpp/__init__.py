"""ddp_cpp - ddp.cpp from Python. `import ddp_cpp.torch` registers the torch.distributed backend "ddpcpp"."""

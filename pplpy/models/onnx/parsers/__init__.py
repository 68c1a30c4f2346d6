"""Parse functions for ops whose ONNX encoding needs code (see encodings.py).  The op
declarations in engines/x86/ops register them; this package registers nothing itself."""

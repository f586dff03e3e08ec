"""What in a program, binary or repository needs a GPU, read without running it: ELF facts (elf.py), how a
program links the CUDA runtime (linkage.py), and which FakeGPU path runs each entry point of a repository
(repo/, `fakegpu analyze-repo`)."""

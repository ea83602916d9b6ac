"""Splits Megatron-LM flags the way a shell would (shlex) and prints one `flag=value` per line."""
import shlex
import sys

words = shlex.split(open(sys.argv[1]).read(), comments=True)
i = 0
while i < len(words):
    assert words[i].startswith("--"), words[i]
    if i + 1 < len(words) and not words[i + 1].startswith("--"):
        print(f"{words[i]}={words[i + 1]}")
        i += 2
    else:
        print(f"{words[i]}=true")
        i += 1

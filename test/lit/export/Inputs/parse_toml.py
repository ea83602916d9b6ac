"""Parses a torchtitan job config with tomllib and prints one `section.key=value` per line."""
import sys
import tomllib

with open(sys.argv[1], "rb") as f:
    config = tomllib.load(f)
for section, values in config.items():
    for key, value in values.items():
        print(f"{section}.{key}={value!r}")

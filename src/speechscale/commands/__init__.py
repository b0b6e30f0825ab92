"""One module per command: each has its handlers and a `register(sub, command)` that adds its parsers.

cli.py keeps only the table of these modules and `main`; nothing imports cli.py.
"""

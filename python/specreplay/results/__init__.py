"""The results file: its Arrow schema, reading and writing it, the columns derived from it."""

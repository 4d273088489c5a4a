"""The ``cardquota`` command line: argparse commands over the core; formatting lives in :mod:`.output`."""

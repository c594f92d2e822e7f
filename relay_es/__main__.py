"""``python -m relay_es`` is the ``relay`` command."""

import sys

from relay_es.composition.cli import main

if __name__ == "__main__":
    sys.exit(main())

"""`python -m adk_gateway.loadtest`: the same as `adk-gateway loadtest`."""

import sys

from adk_gateway.loadtest.cli import main

if __name__ == "__main__":
    sys.exit(main())

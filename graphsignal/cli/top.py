"""graphsignal-top: not yet available."""
import sys


def main(argv=None) -> int:
    sys.stderr.write("graphsignal-top: not yet available in this version; read http://127.0.0.1:18259/signals\n")
    return 1


if __name__ == "__main__":
    sys.exit(main())

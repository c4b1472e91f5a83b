import sys

try:
    from stagecrawl.cli import main
except KeyboardInterrupt:  # Ctrl-C while the interpreter was still importing: no traceback
    sys.exit(130)

main()

"""``python -m twinloop ...`` runs the command line (as the ``twinloop`` script does)."""

from twinloop.cli import main

main()

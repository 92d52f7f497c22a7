"""graphsignal-top: the /signals client, the view model and the
curses-free renderer; screen.py owns the terminal (the only module here
that imports curses). Kernel names and categories come from
graphsignal.naming. The entry point is graphsignal.cli.top."""

"""graphsignal-top: the /signals client, the view model, the kernel
taxonomy and the curses-free renderer; screen.py owns the terminal (the
only module here that imports curses). The entry point is
graphsignal.cli.top."""

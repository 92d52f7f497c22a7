"""graphsignal-top's library layer: the /signals client, the view model,
the kernel taxonomy and the curses-free renderer. The terminal front end
is graphsignal.cli.top; nothing here imports curses."""

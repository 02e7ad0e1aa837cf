"""The `moecert` command line: `app` dispatches the subcommands, `options` declares their
options, and each `*_command` module is one subcommand."""

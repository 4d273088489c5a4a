"""The Volcano scheduler's configuration: its reader and the Go regular expressions its arguments use."""

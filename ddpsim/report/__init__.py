"""Tables, Markdown and matplotlib figures, made from Results only (nothing here re-simulates)."""

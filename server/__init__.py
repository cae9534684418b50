"""infill-ls language server (pygls 2): one small handler module per LSP area, settings as a typed dataclass."""

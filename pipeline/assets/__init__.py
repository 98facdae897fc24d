"""Assets, one module per domain. Every module here is loaded by ``pipeline.definitions``."""

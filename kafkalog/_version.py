"""The one place the version is written (read by pyproject.toml, ``kafkalog.__version__`` and
``kafkalog --version``)."""
__version__ = "0.1.0"

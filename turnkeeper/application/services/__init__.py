"""Application services: one class per capability, each use case one unit of work."""

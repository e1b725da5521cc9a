"""The Dask driver and front-end (``graph``: ops as graphs whose tasks dispatch per chunk) and
the result buffers its tasks write into (``canvas``)."""

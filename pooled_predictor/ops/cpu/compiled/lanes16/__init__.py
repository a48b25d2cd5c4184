"""The blocked kernels at 16 lanes (NCHW16c): each module here is its template's source
(compiled/<name>.py) run again with LANES = 16 (compiled/widths.py), imported on first use."""

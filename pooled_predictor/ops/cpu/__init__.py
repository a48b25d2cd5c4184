"""CPU kernels (numpy), one module per op family; each registers on import.

Every kernel writes into its preallocated output (numpy ``out=``) and is
vectorized: no Python loop over pixels, rows or batch items.
"""

from ..shapes import import_submodules

import_submodules(__name__, __path__)

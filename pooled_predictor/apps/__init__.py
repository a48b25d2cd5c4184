"""Applications built on the public API (the OCR demo)."""

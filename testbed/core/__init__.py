"""The pure leaf every layer, ``analysis`` and the delay line may import (standard library only):
units, field paths, frame sizes, the one quantile, errors, atomic files and locks."""

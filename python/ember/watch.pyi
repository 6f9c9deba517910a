# Type stubs of ember.watch: the attention watch's statistics.
from typing import Dict, List, Optional

from ._C import Tensor

quantities: List[str]

def meaning(quantity: str) -> str:
    """What a quantity measures, one line."""
def head_statistics(scores: Optional[Tensor], weights: Tensor, dscores: Optional[Tensor] = None,
                    dweights: Optional[Tensor] = None, blocked: Optional[Tensor] = None,
                    query_padding: Optional[Tensor] = None) -> Dict[str, List[float]]:
    """Per head, the watch's quantities of one attention module on one batch, from the
    scores and weights [B, H, L, S] an attention hook hands over and the gradients reaching
    them: {quantity: [one float per head]}."""

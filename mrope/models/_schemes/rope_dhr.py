"""RoPE-DHR (``rope-dhr``): tile tokens take the positions of the thumbnail tokens over them, on Qwen2-VL's ids.

Source: Liu et al., "CoMemo: LVLMs Need Image Context with Image Memory" (ICML 2025), repo LALBJ/CoMemo
at d2d9d2f, comemo/model/comemo_chat/modeling_comemo_chat.py: ``calculate_subimage_indices`` :40-77
(an image of ``X x Y`` tiles, each tile's 16 x 16 tokens at the thumbnail tokens over them, its rows and
columns ``np.linspace`` over the tile's span of the thumbnail and truncated; then the thumbnail's 256
tokens one position each) and ``chat`` :404-427 (the image takes the positions from one past ``<img>``;
the text after it counts on as if only the thumbnail were there; one tile alone, no thumbnail, is laid
out as a thumbnail). Positions are 1-D (InternLM2's RoPE), so the scheme lays every vision block on one
line (``spatial="sequential"``, step 1) and its tiles by ``tiles="thumbnail"``. InternVL (InternLM2 ids,
16 x 16 tokens per 448-pixel tile) is not in mrope: the scheme takes Qwen2-VL's token ids, sizing and spec
(every row equal: 1-D RoPE, theta 1e6); an InternVL image of ``X x Y`` tiles is
``Image(grid=(1, 32 * Y, 32 * X), tiles=(X, Y), thumbnail=True)`` under merge 2.
"""

from mrope.models._families import qwen2_vl
from mrope.models._family import ModelFamily

SCHEME: ModelFamily = qwen2_vl.FAMILY.replace(
    name="rope-dhr",
    model_types=(),
    aliases=(),
    rules=qwen2_vl.FAMILY.rules.replace(spatial="sequential", vision_step=1, tiles="thumbnail"),
    transformers5={},
    exactness="research scheme on Qwen2-VL's ids: LALBJ/CoMemo modeling_comemo_chat.py "
    "calculate_subimage_indices (tile tokens at their thumbnail tokens), 1-D positions",
)
"""RoPE-DHR: tiles at their thumbnail's positions, every block on one line."""

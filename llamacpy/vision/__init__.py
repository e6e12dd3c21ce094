"""Vision input (`--mmproj`): mmproj GGUF loading, one file per vision tower found through a
registry keyed by `clip.projector_type`, and mtmd's image preprocessing.

    proj = load_projector("mmproj.gguf")
    emb = proj.encode(open("cat.jpg", "rb").read())   # ImageEmbedding
    emb.embeddings                                    # float32 [emb.n_tokens, proj.n_embd]
    begin, end = image_markers(proj.projector_type)   # text around the image in the prompt
"""

from .clip import ImageEmbedding, PreparedImage, Projector
from .preprocess import ImageError, ImageTooLargeError, decode_image
from .registry import MEDIA_MARKER, PROJECTORS, image_markers, load_projector

__all__ = [
    "ImageEmbedding", "ImageError", "ImageTooLargeError", "MEDIA_MARKER", "PROJECTORS",
    "PreparedImage", "Projector", "decode_image", "image_markers", "load_projector",
]

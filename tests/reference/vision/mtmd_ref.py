"""llama.cpp's own image path (mtmd) through llama-cpp-python 0.3.36's ctypes bindings.

`Mtmd(mmproj, text_model).encode(image_bytes)` decodes the image with stb_image, preprocesses,
tokenizes one media marker and runs mtmd_encode_chunk; it returns the image chunk's grid (nx, ny,
n_tokens), mtmd_get_output_embd's embeddings and, with `capture=True`, the normalised pixels
llama.cpp fed the encoder, read back from the patch-embedding im2col node through the scheduler's
eval callback (an F32 projector keeps them exact; F16 would round them).
"""

from __future__ import annotations

import ctypes
import time
from pathlib import Path

import numpy as np

GGML_TYPE_F32, GGML_TYPE_F16 = 0, 1


class GGMLTensor(ctypes.Structure):
    """The leading fields of struct ggml_tensor (ggml.h), enough to read a node's shape and data."""

    _fields_ = [
        ("type", ctypes.c_int),
        ("buffer", ctypes.c_void_p),
        ("ne", ctypes.c_int64 * 4),
        ("nb", ctypes.c_size_t * 4),
        ("op", ctypes.c_int),
        ("op_params", ctypes.c_int32 * 16),
        ("flags", ctypes.c_int32),
        ("src", ctypes.c_void_p * 10),
        ("view_src", ctypes.c_void_p),
        ("view_offs", ctypes.c_size_t),
        ("data", ctypes.c_void_p),
        ("name", ctypes.c_char * 64),
    ]


def _ggml_op_desc():
    import llama_cpp

    lib = ctypes.CDLL(str(Path(llama_cpp.__file__).parent / "lib" / "libggml-base.so"))
    lib.ggml_op_desc.argtypes = [ctypes.c_void_p]
    lib.ggml_op_desc.restype = ctypes.c_char_p
    return lib.ggml_op_desc


class Mtmd:
    """One mtmd context: mmproj + a text model whose n_embd matches the projection width.
    flash_attn None is llama.cpp's default (auto: on for the CPU backend)."""

    def __init__(self, mmproj: Path, text_model: Path, n_threads: int = 1,
                 flash_attn: bool | None = False, image_min_tokens: int = -1,
                 image_max_tokens: int = -1, capture: bool = False):
        import llama_cpp
        from llama_cpp import mtmd_cpp as mtmd

        llama_cpp.llama_backend_init()
        mparams = llama_cpp.llama_model_default_params()
        mparams.use_extra_bufts = False  # the AMX/repack buffers crash on this machine
        self.model = llama_cpp.llama_model_load_from_file(str(text_model).encode(), mparams)
        if not self.model:
            raise RuntimeError(f"llama.cpp cannot load {text_model}")
        p = mtmd.mtmd_context_params_default()
        p.use_gpu = False
        p.print_timings = False
        p.n_threads = n_threads
        p.warmup = False
        p.flash_attn_type = {None: llama_cpp.LLAMA_FLASH_ATTN_TYPE_AUTO,
                             True: llama_cpp.LLAMA_FLASH_ATTN_TYPE_ENABLED,
                             False: llama_cpp.LLAMA_FLASH_ATTN_TYPE_DISABLED}[flash_attn]
        p.image_min_tokens = image_min_tokens
        p.image_max_tokens = image_max_tokens
        self.captured: list[np.ndarray] = []
        if capture:
            op_desc = _ggml_op_desc()

            def observe(t, ask, _user):
                if ask:
                    return True
                node = ctypes.cast(t, ctypes.POINTER(GGMLTensor)).contents
                if op_desc(t) == b"IM2COL" and not self.captured:
                    self.captured.append(_read(node))
                return True

            self._callback = llama_cpp.ggml_backend_sched_eval_callback(observe)
            p.cb_eval = self._callback
        self.mtmd, self.lib = mtmd, llama_cpp
        self.ctx = mtmd.mtmd_init_from_file(str(mmproj).encode(), self.model, p)
        if not self.ctx:
            raise RuntimeError(f"mtmd_init_from_file failed for {mmproj}")

    def decode(self, data: bytes) -> np.ndarray | None:
        """stb_image's RGB decode of `data` (mtmd_helper_bitmap_init_from_buf), or None."""
        bitmap = self._bitmap(data)
        if bitmap is None:
            return None
        try:
            nx, ny = self.mtmd.mtmd_bitmap_get_nx(bitmap), self.mtmd.mtmd_bitmap_get_ny(bitmap)
            ptr = self.mtmd.mtmd_bitmap_get_data(bitmap)
            return np.ctypeslib.as_array(ptr, (ny, nx, 3)).copy()
        finally:
            self.mtmd.mtmd_bitmap_free(bitmap)

    def _bitmap(self, data: bytes):
        buf = (ctypes.c_uint8 * len(data)).from_buffer_copy(data)
        return self.mtmd.mtmd_helper_bitmap_init_from_buf(self.ctx, buf, len(data), False)

    def encode(self, data: bytes, repeat: int = 1) -> dict:
        """{nx, ny, n_tokens, embd float32 [n_tokens, n_embd], pixels or None, seconds}."""
        mtmd = self.mtmd
        bitmap = self._bitmap(data)
        if bitmap is None:
            raise ValueError("llama.cpp cannot decode the image")
        chunks = mtmd.mtmd_input_chunks_init()
        try:
            marker = mtmd.mtmd_default_marker()
            text = mtmd.mtmd_input_text(marker, len(marker), False, True)
            bitmaps = (mtmd.mtmd_bitmap_p_ctypes * 1)(bitmap)
            if mtmd.mtmd_tokenize(self.ctx, chunks, ctypes.byref(text), bitmaps, 1) != 0:
                raise RuntimeError("mtmd_tokenize failed")
            chunk = next(mtmd.mtmd_input_chunks_get(chunks, i)
                         for i in range(mtmd.mtmd_input_chunks_size(chunks))
                         if mtmd.mtmd_input_chunk_get_type(mtmd.mtmd_input_chunks_get(chunks, i))
                         == mtmd.MTMD_INPUT_CHUNK_TYPE_IMAGE)
            tokens = mtmd.mtmd_input_chunk_get_tokens_image(chunk)
            n = mtmd.mtmd_image_tokens_get_n_tokens(tokens)
            seconds = []
            for _ in range(repeat):
                self.captured.clear()
                t0 = time.perf_counter()
                if mtmd.mtmd_encode_chunk(self.ctx, chunk) != 0:
                    raise RuntimeError("mtmd_encode_chunk failed")
                seconds.append(time.perf_counter() - t0)
            n_embd = self.lib.llama_model_n_embd_inp(self.model)
            embd = np.ctypeslib.as_array(mtmd.mtmd_get_output_embd(self.ctx), (n, n_embd)).copy()
            return {"nx": mtmd.mtmd_image_tokens_get_nx(tokens),
                    "ny": mtmd.mtmd_image_tokens_get_ny(tokens), "n_tokens": n, "embd": embd,
                    "n_pos": mtmd.mtmd_input_chunk_get_n_pos(chunk),
                    "pixels": self.captured[0] if self.captured else None, "seconds": seconds}
        finally:
            mtmd.mtmd_input_chunks_free(chunks)
            mtmd.mtmd_bitmap_free(bitmap)

    def close(self) -> None:
        if self.ctx:
            self.mtmd.mtmd_free(self.ctx)
            self.ctx = None
        if self.model:
            self.lib.llama_model_free(self.model)
            self.model = None


def _read(node: GGMLTensor) -> np.ndarray:
    """An im2col node [N, OH, OW, C*KH*KW] back into the image it was cut from: float32 [h, w, 3].
    The patches do not overlap (stride = kernel), so every pixel appears exactly once."""
    kk, ow, oh = node.ne[0], node.ne[1], node.ne[2]
    k = int(round((kk // 3) ** 0.5))
    dtype = np.float32 if node.type == GGML_TYPE_F32 else np.float16
    n = kk * ow * oh
    raw = ctypes.string_at(node.data, n * np.dtype(dtype).itemsize)
    cols = np.frombuffer(raw, dtype).astype(np.float32).reshape(oh, ow, 3, k, k)
    return np.ascontiguousarray(cols.transpose(0, 3, 1, 4, 2).reshape(oh * k, ow * k, 3))


def as_mrope_text_model(src: Path, dst: Path, n_deepstack: int = 0) -> Path:
    """A copy of a tiny `qwen3` text GGUF relabelled `qwen3vl` (M-RoPE, optional deepstack
    input width), so mtmd reports the image grid (nx, ny) as it does for Qwen-VL models."""
    from gguf import GGUFReader, GGUFValueType, GGUFWriter

    r = GGUFReader(str(src))
    w = GGUFWriter(str(dst), "qwen3vl")
    for field in r.fields.values():
        if field.name.startswith("GGUF.") or field.name == "general.architecture":
            continue
        name = field.name.replace("qwen3.", "qwen3vl.", 1)
        vtype = field.types[0]
        if vtype == GGUFValueType.ARRAY:
            w.add_array(name, field.contents())
        else:
            w.add_key_value(name, field.contents(), vtype)
    head_dim = int(r.fields["qwen3.attention.key_length"].contents())
    w.add_array("qwen3vl.rope.dimension_sections", [head_dim // 4, head_dim // 8, head_dim // 8, 0])
    if n_deepstack:
        w.add_uint32("qwen3vl.n_deepstack_layers", n_deepstack)
    for t in r.tensors:
        w.add_tensor(t.name, np.asarray(t.data), raw_shape=list(reversed(t.shape.tolist())),
                     raw_dtype=t.tensor_type)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return dst

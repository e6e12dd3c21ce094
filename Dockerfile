# llama-server on the CPU, with the catalogue's default model baked in:
#   docker build -t llamacpy .            # MODEL=gemma3-270m etc. with --build-arg
#   docker run -p 8080:8080 llamacpy      # http://localhost:8080/ (chat page), /v1 (OpenAI API)
# The Ray Serve image of deploy/rayservice.yaml is the same file on Ray's base image:
#   docker build --build-arg BASE=rayproject/ray:2.60.0-py311-cpu --build-arg EXTRAS=ray \
#     -t llamacpy-ray:0.1.0 .
ARG BASE=python:3.11-slim
FROM ${BASE}
USER root
ARG EXTRAS=""
ARG MODEL=qwen2.5-coder-0.5b
ENV LLAMA_CACHE=/models \
    NUMBA_CACHE_DIR=/var/cache/llamacpy/numba \
    PIP_NO_CACHE_DIR=1 \
    PATH=/app/.venv/bin:$PATH \
    MODEL=${MODEL}
WORKDIR /app
COPY pyproject.toml README.md ./
COPY llamacpy ./llamacpy
COPY scripts ./scripts
# the README's install (scripts/setup.sh: a venv in .venv, llamacpy installed into it), then
# the model from the catalogue and its kernels compiled into numba's cache
RUN LLAMACPY_NO_WARMUP=1 EXTRAS="${EXTRAS}" scripts/setup.sh \
    && llamacpy pull "${MODEL}" \
    && llamacpy warmup "${MODEL}"
EXPOSE 8080
HEALTHCHECK --interval=30s --timeout=5s --start-period=120s \
    CMD python -c "import urllib.request; urllib.request.urlopen('http://127.0.0.1:8080/health')"
CMD ["sh", "-c", "exec llama-server -m \"$MODEL\" --host 0.0.0.0 --port 8080"]

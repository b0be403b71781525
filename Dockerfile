# streamstop proxy (or serve) in a slim, non-root image.
#   docker build -t streamstop .
#   docker run -p 8000:8000 -e STREAMSTOP_UPSTREAM=http://vllm:8000/v1 streamstop
#   docker run -p 8000:8000 streamstop serve          # the echo model, to try it
# Every flag is also an environment variable (STREAMSTOP_...): see `streamstop proxy --help`.
FROM python:3.12-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

WORKDIR /app
COPY pyproject.toml README.md LICENSE ./
COPY streamstop ./streamstop
COPY ragstitch ./ragstitch
RUN pip install ".[server,metrics,fast]" && useradd --system --uid 10001 --no-create-home streamstop

USER 10001
# Listen on every interface of the container; one worker per CPU is a good start
# (STREAMSTOP_WORKERS), or one per container and more replicas.
ENV STREAMSTOP_HOST=0.0.0.0 \
    STREAMSTOP_PORT=8000
EXPOSE 8000

# Liveness: /health answers while the process serves (no client key needed). The standard
# library only: the slim image has no curl.
HEALTHCHECK --interval=10s --timeout=3s --start-period=10s --retries=3 \
    CMD ["python", "-c", "import os, urllib.request; urllib.request.urlopen(f\"http://127.0.0.1:{os.environ.get('STREAMSTOP_PORT', '8000')}/health\", timeout=2)"]

ENTRYPOINT ["streamstop"]
CMD ["proxy"]

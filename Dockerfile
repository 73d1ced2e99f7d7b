# One image for both processes: `webhook-scaler` (the default) and `reconciler`.
# Build: docker build --build-arg REVISION="$(git rev-parse HEAD)" -t gitea-runner-scaler .
FROM python:3.11-slim AS build
# The commit built from, which `--version` prints: `docker build --build-arg REVISION=$(git rev-parse HEAD)`.
ARG REVISION=""
WORKDIR /src
COPY pyproject.toml README.md ./
COPY webhook_scaler ./webhook_scaler
COPY reconciler ./reconciler
COPY deploy/image-install.sh /usr/local/bin/image-install.sh
# The root filesystem is read-only at run time and PYTHONDONTWRITEBYTECODE is set, so bytecode is
# compiled here or on every start. unchecked-hash: the .pyc files are used as they are, whatever
# the sources' timestamps after the COPY below (and the layer does not depend on the build's clock).
RUN sh /usr/local/bin/image-install.sh /opt/grs /src "$REVISION" \
    && rm -rf /opt/grs/lib/python3.11/site-packages/pip /opt/grs/lib/python3.11/site-packages/setuptools /opt/grs/bin/pip* \
    && /opt/grs/bin/python -m compileall -q -f -j 0 --invalidation-mode unchecked-hash /opt/grs/lib/python3.11/site-packages

FROM python:3.11-slim
# VERSION defaults to pyproject.toml's version (a unit test keeps them equal); REVISION is the commit.
ARG VERSION=0.1.0
ARG REVISION=""
ARG SOURCE=https://github.com/bpg-pw/gitea-runner-scaler
LABEL org.opencontainers.image.title="gitea-runner-scaler" \
      org.opencontainers.image.description="Event-driven autoscaler for Gitea Actions: one ephemeral act_runner Kubernetes Job per queued job." \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${REVISION}" \
      org.opencontainers.image.source="${SOURCE}" \
      org.opencontainers.image.licenses="Apache-2.0"
COPY --from=build /opt/grs /opt/grs
ENV PATH=/opt/grs/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1
# A fixed non-root uid, matching the chart's runAsUser; no shell access is needed at run time.
USER 10001:10001
EXPOSE 8080 8081
CMD ["webhook-scaler"]

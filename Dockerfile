# One image for both processes: `webhook-scaler` (the default) and `reconciler`.
# Build: docker build -t gitea-runner-scaler .
FROM python:3.11-slim AS build
WORKDIR /src
COPY pyproject.toml README.md ./
COPY webhook_scaler ./webhook_scaler
COPY reconciler ./reconciler
COPY deploy/image-install.sh /usr/local/bin/image-install.sh
RUN sh /usr/local/bin/image-install.sh /opt/grs /src \
    && find /opt/grs -name '__pycache__' -prune -exec rm -rf {} + \
    && rm -rf /opt/grs/lib/python3.11/site-packages/pip /opt/grs/lib/python3.11/site-packages/setuptools /opt/grs/bin/pip*

FROM python:3.11-slim
LABEL org.opencontainers.image.title="gitea-runner-scaler" \
      org.opencontainers.image.description="Event-driven autoscaler for Gitea Actions on Kubernetes"
COPY --from=build /opt/grs /opt/grs
ENV PATH=/opt/grs/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1
# A fixed non-root uid, matching the chart's runAsUser; no shell access is needed at run time.
USER 10001:10001
EXPOSE 8080 8081
CMD ["webhook-scaler"]

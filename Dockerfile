# syntax=docker/dockerfile:1
# knative-ha-webhook container image.
#
#   docker build -t REGISTRY/knative-ha-webhook:0.1.0 .
#
# Stage 1 builds a release binary; stage 2 is distroless (glibc + libgcc, no shell, no package
# manager) running as the unprivileged user 65532. The chart's securityContext matches:
# runAsNonRoot, runAsUser 65532, readOnlyRootFilesystem (the server writes nothing to disk).

FROM rust:1.95-bookworm AS builder
WORKDIR /src

# Dependencies first, in their own layer: rebuilt only when Cargo.toml / Cargo.lock change.
# Dummy lib and main let cargo compile every dependency without the real sources.
COPY Cargo.toml Cargo.lock ./
RUN mkdir src \
 && echo 'fn main() {}' > src/main.rs \
 && touch src/lib.rs \
 && cargo build --release --locked \
 && rm -rf src

# The real sources. Touch them so cargo rebuilds the crate (not the cached dependencies).
COPY src ./src
RUN touch src/lib.rs src/main.rs \
 && cargo build --release --locked \
 && cp target/release/knative-ha-webhook /knative-ha-webhook

FROM gcr.io/distroless/cc-debian12:nonroot
LABEL org.opencontainers.image.title="knative-ha-webhook" \
      org.opencontainers.image.description="Mutating admission webhook that makes Knative Serving's control plane highly available" \
      org.opencontainers.image.licenses="Apache-2.0"
COPY --from=builder /knative-ha-webhook /usr/local/bin/knative-ha-webhook
USER 65532:65532
# 8443: HTTPS admission (POST /mutate); 9090: /metrics, /healthz, /readyz
EXPOSE 8443 9090
ENTRYPOINT ["/usr/local/bin/knative-ha-webhook"]
CMD ["serve"]

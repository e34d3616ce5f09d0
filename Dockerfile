# syntax=docker/dockerfile:1
# knative-ha-webhook container image.
#
#   docker build --build-arg REVISION=$(git rev-parse HEAD) -t REGISTRY/knative-ha-webhook:0.1.0 .
#   (or podman build ...; VERSION defaults to the crate version, checked by check-docker-context)
#   docker push REGISTRY/knative-ha-webhook:0.1.0
#
# Stage 1 builds a release binary; stage 2 is distroless (glibc + libgcc, no shell, no package
# manager) running as the unprivileged user 65532. The chart's securityContext matches:
# runAsNonRoot, runAsUser 65532, readOnlyRootFilesystem (the server writes nothing to disk).
# Without Docker: scripts/release/build-image builds the same kind of image with buildah (see docs/install.md).
#
# The build context is what .dockerignore admits (Cargo.toml, Cargo.lock, src/, benches/,
# testkit/Cargo.toml);
# scripts/check/check-docker-context runs this stage's RUN steps (cargo build -> cargo check) on exactly
# that context, so a target the manifest declares but the context hides fails the test command.

# Base images are pinned by digest (the tag says which release it was; .github/dependabot.yml
# proposes the next): a rebuild gets the bytes that were reviewed, never what a moved tag points at.
FROM rust:1.95-bookworm@sha256:6258907abe69656e41cd992e0b705cdcfabcbbe3db374f92ed2d47121282d4a1 AS builder
WORKDIR /src

# Dependencies first, in their own layer: rebuilt only when Cargo.toml / Cargo.lock change.
# Stub sources for every target Cargo.toml declares (the lib, the binary, the `engine` bench)
# let cargo parse the manifest and compile every dependency without the real sources. The
# workspace member testkit/ (test helpers, a dev-dependency: no release build compiles it) only
# needs its manifest and a stub lib.
COPY Cargo.toml Cargo.lock ./
COPY testkit/Cargo.toml ./testkit/
RUN mkdir -p src benches testkit/src \
 && touch testkit/src/lib.rs \
 && echo 'fn main() {}' > src/main.rs \
 && touch src/lib.rs \
 && echo 'fn main() {}' > benches/engine.rs \
 && cargo build --release --locked \
 && rm -rf src benches

# The revision goes into the binary (`knative_ha_webhook_build_info{revision}`): the build reads
# KHW_GIT_REVISION at compile time. Empty (the default) leaves the label out. Declared after the
# dependency layer, so a new revision rebuilds only the crate.
ARG REVISION=
ENV KHW_GIT_REVISION=${REVISION}

# The real sources. Touch them so cargo rebuilds the crate (not the cached dependencies).
COPY src ./src
COPY benches ./benches
RUN touch src/lib.rs src/main.rs \
 && cargo build --release --locked

FROM gcr.io/distroless/cc-debian12:nonroot@sha256:9dac0a79194e45a7da0158a9c6da57b217585af0786db3845d1f0ec1a0dd182f
ARG VERSION=0.1.0
ARG REVISION=unknown
LABEL org.opencontainers.image.title="knative-ha-webhook" \
      org.opencontainers.image.description="Mutating admission webhook that makes Knative Serving's control plane highly available" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${REVISION}"
COPY --from=builder /src/target/release/knative-ha-webhook /usr/local/bin/knative-ha-webhook
USER 65532:65532
# 8443: HTTPS admission (POST /mutate); 9090: /metrics, /healthz, /readyz
EXPOSE 8443 9090
ENTRYPOINT ["/usr/local/bin/knative-ha-webhook"]
CMD ["serve"]

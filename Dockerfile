# kbrun image: `docker build -t kbrun .` at the repository root.
# Used by `kbrun k8s-job` (--image): each pod runs `kbrun` as user 10001.
# Build stage: the Debian bookworm toolchain and -dev packages of
# .ci/install-deps; runtime stage: only the shared libraries kbrun links.

FROM debian:bookworm AS build
ARG DEBIAN_FRONTEND=noninteractive
RUN apt-get update \
 && apt-get install -y --no-install-recommends \
      build-essential cmake pkg-config \
      liblua5.4-dev libuv1-dev libcurl4-openssl-dev libcjson-dev libyaml-dev libhttp-parser-dev libsqlite3-dev libpq-dev \
      libprotobuf-c-dev protobuf-c-compiler \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY . .
# The Lua library and scenarios install under /usr/local/share/kbrun, where
# the binary looks for them (<bin>/../share/kbrun/lua); DESTDIR stages the
# tree for the runtime stage.
RUN cmake -S . -B /build -DCMAKE_BUILD_TYPE=Release -DCMAKE_INSTALL_PREFIX=/usr/local \
 && cmake --build /build -j"$(nproc)" --target kbrun \
 && DESTDIR=/staging cmake --install /build \
 && /staging/usr/local/bin/kbrun --version

FROM debian:bookworm-slim
ARG DEBIAN_FRONTEND=noninteractive
RUN apt-get update \
 && apt-get install -y --no-install-recommends \
      liblua5.4-0 libuv1 libcurl4 libcjson1 libyaml-0-2 libhttp-parser2.9 libprotobuf-c1 libsqlite3-0 libpq5 ca-certificates \
 && rm -rf /var/lib/apt/lists/* \
 && groupadd --system --gid 10001 kbrun \
 && useradd --system --uid 10001 --gid kbrun --home-dir /home/kbrun --create-home --shell /usr/sbin/nologin kbrun \
 && mkdir -p /results && chown kbrun:kbrun /results
COPY --from=build /staging/usr/local/ /usr/local/
USER 10001:10001
WORKDIR /home/kbrun
ENTRYPOINT ["kbrun"]
CMD ["--help"]

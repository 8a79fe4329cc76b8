# Sluice: a multi-stage build. The first stage compiles a release binary;
# the runtime image is Debian slim with that binary alone (~90 MB), running
# as nobody with its data on the /data volume.
FROM rust:1.93-bookworm AS build
WORKDIR /src
COPY . .
RUN cargo build --release --locked --bin sluice \
 && strip target/release/sluice

FROM debian:bookworm-slim
COPY --from=build /src/target/release/sluice /usr/local/bin/sluice
RUN mkdir /data && chown 65534:65534 /data
USER 65534:65534
VOLUME /data
EXPOSE 9201
# The image has no curl; bash's /dev/tcp asks /-/ready.
HEALTHCHECK --interval=10s --timeout=3s --start-period=30s --retries=3 \
  CMD ["bash", "-c", "exec 3<>/dev/tcp/127.0.0.1/9201 && printf 'GET /-/ready HTTP/1.0\\r\\n\\r\\n' >&3 && grep -q '200 OK' <&3"]
ENTRYPOINT ["/usr/local/bin/sluice"]
CMD ["--listen", "0.0.0.0:9201", "--data-dir", "/data"]

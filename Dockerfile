# The celsched manager image. Build with the Makefile's version stamps:
#   docker build --build-arg VERSION=$(git describe --tags --always) -t celsched .
FROM golang:1.26 AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
ARG VERSION=v0.0.0-dev
RUN CGO_ENABLED=0 make build VERSION=${VERSION}

FROM gcr.io/distroless/static:nonroot
COPY --from=build /src/bin/manager /manager
USER 65532:65532
ENTRYPOINT ["/manager"]

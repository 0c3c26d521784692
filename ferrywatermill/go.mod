module github.com/ferrydev/ferry/ferrywatermill

go 1.24.0

require (
	github.com/ThreeDotsLabs/watermill v1.5.1
	github.com/ferrydev/ferry v0.1.0
	github.com/stretchr/testify v1.12.1
)

require (
	github.com/google/uuid v1.6.0 // indirect
	github.com/lithammer/shortuuid/v3 v3.0.7 // indirect
	github.com/oklog/ulid v1.3.1 // indirect
	github.com/pkg/errors v0.9.1 // indirect
	go.yaml.in/yaml/v3 v3.0.5 // indirect
)

module github.com/ferrydev/ferry/ferryconsole

go 1.25.0

require (
	github.com/ferrydev/ferry v0.1.0
	github.com/stretchr/testify v1.12.1
	golang.org/x/crypto v0.55.0
)

require (
	github.com/google/uuid v1.6.0 // indirect
	go.yaml.in/yaml/v3 v3.0.5 // indirect
)

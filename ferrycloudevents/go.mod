module github.com/ferrydev/ferry/ferrycloudevents

go 1.24.0

require (
	github.com/cloudevents/sdk-go/v2 v2.16.2
	github.com/ferrydev/ferry v0.1.0
	github.com/stretchr/testify v1.12.1
)

require (
	github.com/json-iterator/go v1.1.12 // indirect
	github.com/modern-go/concurrent v0.0.0-20180306012644-bacd9c7ef1dd // indirect
	github.com/modern-go/reflect2 v1.0.2 // indirect
	go.yaml.in/yaml/v3 v3.0.5 // indirect
)

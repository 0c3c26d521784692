module github.com/ferrydev/ferry/ferrybroker/ferryamqp

go 1.24.0

require (
	github.com/ferrydev/ferry v0.1.0
	github.com/rabbitmq/amqp091-go v1.16.0
	github.com/stretchr/testify v1.12.1
)

require go.yaml.in/yaml/v3 v3.0.5 // indirect

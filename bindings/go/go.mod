module github.com/fencelock/fencelock-go

go 1.24

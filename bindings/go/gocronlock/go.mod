module github.com/fencelock/fencelock-go/gocronlock

go 1.24

require (
	github.com/fencelock/fencelock-go v0.1.0
	github.com/go-co-op/gocron/v2 v2.21.2
	github.com/google/uuid v1.6.0
)

require (
	github.com/jonboulle/clockwork v0.5.0 // indirect
	github.com/robfig/cron/v3 v3.0.1 // indirect
)

// In the repository the adapter builds against the module in the directory above; a user's
// build ignores this line and takes the version required above.
replace github.com/fencelock/fencelock-go => ../

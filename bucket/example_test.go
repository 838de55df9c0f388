package bucket_test

import (
	"fmt"

	"github.com/conclave-io/conclave/bucket"
)

func Example() {
	fmt.Println(bucket.Name, bucket.Stream, bucket.MinTTL)
	// Output: CHORIA_LEADER_ELECTION KV_CHORIA_LEADER_ELECTION 1s
}

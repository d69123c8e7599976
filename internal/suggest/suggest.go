// Package suggest holds the edit distance behind the "did you mean" hints of the command
// line (misspelt commands and flags) and of the config decoder (misspelt keys).
package suggest

// Distance is the Levenshtein distance between two short strings. Strings longer than 64
// bytes are never close to anything: their distance is reported as 64.
func Distance(a, b string) int {
	if len(a) > 64 || len(b) > 64 {
		return 64
	}
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

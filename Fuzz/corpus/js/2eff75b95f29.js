function(doc) {
new Date('2024-02-03T04:05:06Z').getTime()
}
function(doc) {
'2024-01-05'.match(/(\d+)-(\d+)/)[2]
}
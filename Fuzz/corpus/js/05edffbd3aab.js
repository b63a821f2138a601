function(doc) {
let total = 0; for (let i = 0; i < 10; i++) { if (i % 2) continue; if (i > 6) break; total += i; } total
}
function(doc) {
function f() { return f(); } f()
}
function(doc) {
function (
}
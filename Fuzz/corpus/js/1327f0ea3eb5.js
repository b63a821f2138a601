function(doc) {
parseInt('42px') + parseFloat('1.5e1') + Number('7')
}
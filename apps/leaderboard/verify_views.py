from django.http import HttpResponse


def verify(request):
    return HttpResponse("verify: in progress")

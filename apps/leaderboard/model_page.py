from django.http import HttpResponse


def model_reputation(request, model_id):
    return HttpResponse("model page: in progress")
